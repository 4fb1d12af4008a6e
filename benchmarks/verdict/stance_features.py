import re, math
import numpy as np
W=re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
NUM=re.compile(r"\d[\d,]*(?:\.\d+)?")
STOP=set("the a an of to in and or is was were be been are on for with that this by as at from it its has have had not no yes did does do what who when where which how why there their they he she his her said says".split())
CUES={
 'ref': r"\b(false|fake|hoax|misleading|debunk\w*|no evidence|not true|untrue|fabricat\w*|doctored|altered|photoshop\w*|manipulated|satir\w*|myth|baseless|incorrect|inaccurate|wrong|rumou?rs?|conspiracy|scam|misinformation|disinformation|unfounded|bogus|fact.?check\w*|viral|circulat\w*|no record|no such|debunked|pants on fire|mislead\w*)\b",
 'neg': r"\b(not|never|no|none|nor|didn't|doesn't|isn't|wasn't|aren't|weren't|won't|cannot|can't|denied|denies|deny|refused|rejected)\b",
 'sup': r"\b(confirmed|confirms|true|indeed|correct|accurate|announced|officially|verified|approved|signed|passed|launched|according to|data show\w*|statistics)\b",
 'nee': r"\b(unclear|not clear|no information|could not|couldn't|unknown|unverified|not found|not available|no data|unable)\b",
 'con': r"\b(however|but|although|though|partly|partially|half|mixed|context|exaggerat\w*|out of context|cherry|while|some|despite|yet)\b",
 'claimish': r"\b(claim\w*|alleg\w*|purport\w*|supposedly|post\w*|shared|facebook|twitter|whatsapp|tweet\w*)\b",
}
CRX={k:re.compile(v) for k,v in CUES.items()}
def cw(t): return {w for w in W.findall(t.lower()) if len(w)>2 and w not in STOP}
def nums(t): return {n.replace(',','') for n in NUM.findall(t)}
def pair_feats(c,q,a,cwc,ncl):
    al=a.lower(); wa=cw(a); n=max(1,len(al.split()))
    f=[]
    for k in ('ref','neg','sup','nee','con','claimish'):
        m=len(CRX[k].findall(al)); f+= [min(m,5), m/n*10]
    na=nums(a)
    inter=len(ncl&na)
    f+=[len(na)>0, inter/ max(1,len(ncl)), float(len(ncl)>0 and len(na)>0 and inter==0)]
    ov=len(cwc&wa)/max(1,len(cwc)); f+=[ov, len(cw(q)&wa)/max(1,len(cw(q)))]
    f+=[math.log1p(n), float(n<3), float('no answer could be found' in al)]
    return f
NPF=len(pair_feats('a','b','c',set(),set()))
def claim_feats(c,pairs):
    cwc=cw(c); ncl=nums(c)
    P=np.array([pair_feats(c,q,a,cwc,ncl) for q,a in pairs] or [[0.0]*NPF],dtype=float)
    ov=P[:,18:19] if P.shape[1]>18 else None
    # overlap-weighted mean
    w=P[:,15]+0.05; w=w/w.sum()
    cl=c.lower()
    cf=[len(CRX[k].findall(cl)) for k in ('ref','neg','sup','nee','con','claimish')]+[len(ncl)>0, math.log1p(len(cl.split())), len(pairs)]
    return np.concatenate([P.mean(0),P.max(0),(P*w[:,None]).sum(0),cf])
